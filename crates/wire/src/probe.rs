//! The probe header: fixed, versioned, 24 bytes, network byte order.
//!
//! ```text
//!  0      2   3   4        8      10     12        16                24
//!  +------+---+---+--------+------+------+---------+-----------------+
//!  |magic |ver|flg|session | flow | len  |   seq   |   tx time (ns)  |
//!  +------+---+---+--------+------+------+---------+-----------------+
//! ```
//!
//! 24 bytes is the budget because D-ITG's smallest application packet (a
//! 27-byte Counter-Strike idle update) must still carry a whole header.
//! `len` is the length of the datagram or TCP record including the header;
//! on TCP it frames the records, on UDP it must equal the datagram length,
//! which catches truncated or foreign datagrams. `seq` is 32 bits on the wire
//! and reconstructed to 64 bits by the receiver. In RTT mode the reflector
//! writes its receive and transmit times (16 bytes) right after the header,
//! so a reflected probe is at least [`RTT_MIN_LEN`] bytes.
//!
//! A TCP record longer than the 16-bit `len` can say ([`FLAG_LONG`], up to
//! [`MAX_TCP_RECORD`] bytes) sets `len` to 65535 and carries its whole
//! length in the 4 bytes right after the header ([`field::LONG_LEN`]).

use thiserror::Error;

/// Where each field sits, named once: the encoder, the decoders, the
/// in-place stamps and the authenticator all read these, so nothing else
/// writes a probe byte by its offset.
pub mod field {
    use std::ops::Range;

    /// A byte range of the probe.
    pub type Field = Range<usize>;

    /// [`super::MAGIC`], big-endian.
    pub const MAGIC: Field = 0..2;
    /// [`super::PROBE_VERSION`].
    pub const VERSION: usize = 2;
    /// FLAG_* bits.
    pub const FLAGS: usize = 3;
    /// Session id.
    pub const SESSION: Field = 4..8;
    /// Flow id.
    pub const FLOW: Field = 8..10;
    /// Whole datagram / record length.
    pub const LEN: Field = 10..12;
    /// Sequence number (low 32 bits).
    pub const SEQ: Field = 12..16;
    /// Sender's transmit time, ns.
    pub const TX_TIME: Field = 16..24;
    /// A [`super::FLAG_LONG`] record's whole length, right after the header
    /// (where a reflection's times would be: reflections are never long).
    pub const LONG_LEN: Field = 24..28;
    /// Reflector's receive time (RTT mode), ns, right after the header.
    pub const REFLECT_RX_TIME: Field = 24..32;
    /// Reflector's transmit time (RTT mode), ns.
    pub const REFLECT_TX_TIME: Field = 32..40;
}

/// The bytes of `r` in `buf`, as a fixed-size array (`buf` holds them).
fn bytes<const N: usize>(buf: &[u8], r: field::Field) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&buf[r]);
    a
}

/// "WB" — chosen so that a stray ASCII text or zero-filled buffer never matches.
pub const MAGIC: u16 = 0x5742;
/// Version of the probe header layout; probes of another version are refused.
pub const PROBE_VERSION: u8 = 1;
/// Bytes of the fixed header at the start of every datagram / record.
pub const PROBE_HEADER_LEN: usize = 24;
/// Receive and transmit times the reflector appends in RTT mode.
pub const REFLECTION_LEN: usize = 16;
/// Smallest reflected probe: header plus the reflector's two times.
pub const RTT_MIN_LEN: usize = PROBE_HEADER_LEN + REFLECTION_LEN;

/// The sender asks the receiver to reflect this probe (RTT meter).
pub const FLAG_RTT: u8 = 0x01;
/// This probe is a reflection travelling back to the sender.
pub const FLAG_REFLECTED: u8 = 0x02;
/// The first record of a TCP data connection: a bare header naming the
/// session and flow, sent as soon as the connection is up, so that the
/// receiver knows it from a squatter before the first (possibly delayed)
/// probe. It is no probe: never recorded, never counted. Not valid on UDP.
pub const FLAG_HELLO: u8 = 0x08;
/// A TCP record longer than 65535 bytes: its length is the 32-bit
/// [`field::LONG_LEN`] after the header (the 16-bit `len` reads 65535).
/// Never valid on UDP, whose datagrams are shorter.
pub const FLAG_LONG: u8 = 0x10;
const KNOWN_FLAGS: u8 = FLAG_RTT | FLAG_REFLECTED | FLAG_HELLO | FLAG_LONG;
/// Longest TCP record (`-c` on TCP): 16 MiB. A receiver holds only a
/// record's header, so the bound is about a sender's write buffer (one
/// record at least) and a record's delay, not receive memory.
pub const MAX_TCP_RECORD: u32 = 16 << 20;
/// Bytes a [`FLAG_LONG`] record needs before its length is known.
pub const LONG_HEADER_LEN: usize = PROBE_HEADER_LEN + 4;

/// The fixed header of every probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeHeader {
    /// FLAG_* bits.
    pub flags: u8,
    /// Session id from the control `Hello`; probes of other sessions are foreign.
    pub session: u32,
    /// Flow id within the session.
    pub flow: u16,
    /// Whole datagram / record length in bytes, header included.
    pub len: u16,
    /// Sequence number within the flow (low 32 bits; the receiver unwraps it to 64).
    pub seq: u32,
    /// Sender's transmit time, nanoseconds since the Unix epoch (CLOCK_REALTIME).
    pub tx_ns: u64,
}

/// Times added by the reflector in RTT mode, nanoseconds on its own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reflection {
    /// Reflector's receive time.
    pub rx_ns: u64,
    /// Reflector's transmit time.
    pub tx_ns: u64,
}

/// Why bytes are not a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ProbeError {
    /// Fewer bytes than the header needs.
    #[error("probe too short: {got} bytes, header needs {need}")]
    Short {
        /// Bytes received.
        got: usize,
        /// Bytes the header (or reflection) needs.
        need: usize,
    },
    /// The first two bytes are not [`MAGIC`].
    #[error("wrong magic 0x{0:04x}")]
    Magic(u16),
    /// A header version this build does not read.
    #[error("unsupported probe version {0}")]
    Version(u8),
    /// Flag bits this version does not define.
    #[error("unknown flag bits 0x{0:02x}")]
    Flags(u8),
    /// The header's length field disagrees with the bytes received.
    #[error("bad length field {field} (have {have} bytes)")]
    Length {
        /// The header's length field.
        field: u16,
        /// Bytes actually there.
        have: usize,
    },
}

impl ProbeHeader {
    /// Writes the header into the first 24 bytes of `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), ProbeError> {
        if buf.len() < PROBE_HEADER_LEN {
            return Err(ProbeError::Short {
                got: buf.len(),
                need: PROBE_HEADER_LEN,
            });
        }
        buf[field::MAGIC].copy_from_slice(&MAGIC.to_be_bytes());
        buf[field::VERSION] = PROBE_VERSION;
        buf[field::FLAGS] = self.flags;
        buf[field::SESSION].copy_from_slice(&self.session.to_be_bytes());
        buf[field::FLOW].copy_from_slice(&self.flow.to_be_bytes());
        buf[field::LEN].copy_from_slice(&self.len.to_be_bytes());
        buf[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        buf[field::TX_TIME].copy_from_slice(&self.tx_ns.to_be_bytes());
        Ok(())
    }

    /// Writes the header of a TCP record that fills all of `buf`: `len`
    /// is `buf.len()`, with [`FLAG_LONG`] and the long length when it is
    /// over 65535 (up to [`MAX_TCP_RECORD`]).
    pub fn encode_record(&self, buf: &mut [u8]) -> Result<(), ProbeError> {
        let n = buf.len();
        if n > MAX_TCP_RECORD as usize {
            return Err(ProbeError::Length {
                field: u16::MAX,
                have: n,
            });
        }
        let mut h = *self;
        h.flags &= !FLAG_LONG;
        if n > usize::from(u16::MAX) {
            h.flags |= FLAG_LONG;
            h.len = u16::MAX;
            h.encode(buf)?;
            buf[field::LONG_LEN].copy_from_slice(&(n as u32).to_be_bytes());
            Ok(())
        } else {
            h.len = n as u16;
            h.encode(buf)
        }
    }

    /// The whole length of the TCP record whose header is `h`, decoded
    /// from `buf` (the record's first bytes): `Ok(None)` while a long
    /// record's length has not arrived yet; an error when a long length is
    /// out of range (the stream has lost its framing).
    pub fn record_len(&self, buf: &[u8]) -> Result<Option<usize>, ProbeError> {
        if self.flags & FLAG_LONG == 0 {
            return Ok(Some(usize::from(self.len)));
        }
        if buf.len() < LONG_HEADER_LEN {
            return Ok(None);
        }
        let n = u32::from_be_bytes(bytes(buf, field::LONG_LEN));
        if n <= u32::from(u16::MAX) || n > MAX_TCP_RECORD || self.len != u16::MAX {
            return Err(ProbeError::Length {
                field: self.len,
                have: n as usize,
            });
        }
        Ok(Some(n as usize))
    }

    /// Decodes and validates the header of a received datagram or record
    /// prefix. `have` rules: the length field must be at least the header and
    /// no more than the bytes available (`buf.len()`).
    pub fn decode(buf: &[u8]) -> Result<Self, ProbeError> {
        let h = Self::decode_prefix(buf)?;
        if (h.len as usize) > buf.len() {
            return Err(ProbeError::Length {
                field: h.len,
                have: buf.len(),
            });
        }
        Ok(h)
    }

    /// Decodes a UDP datagram: the length field must equal the datagram size,
    /// so truncated, padded or coalesced datagrams are rejected as foreign.
    pub fn decode_datagram(buf: &[u8]) -> Result<Self, ProbeError> {
        let h = Self::decode_prefix(buf)?;
        if h.len as usize != buf.len() {
            return Err(ProbeError::Length {
                field: h.len,
                have: buf.len(),
            });
        }
        Ok(h)
    }

    /// Decodes only the 24 header bytes (TCP framing reads the header first
    /// and then waits for `len - 24` more bytes).
    pub fn decode_prefix(buf: &[u8]) -> Result<Self, ProbeError> {
        if buf.len() < PROBE_HEADER_LEN {
            return Err(ProbeError::Short {
                got: buf.len(),
                need: PROBE_HEADER_LEN,
            });
        }
        let magic = u16::from_be_bytes(bytes(buf, field::MAGIC));
        if magic != MAGIC {
            return Err(ProbeError::Magic(magic));
        }
        if buf[field::VERSION] != PROBE_VERSION {
            return Err(ProbeError::Version(buf[field::VERSION]));
        }
        let flags = buf[field::FLAGS];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(ProbeError::Flags(flags & !KNOWN_FLAGS));
        }
        let len = u16::from_be_bytes(bytes(buf, field::LEN));
        if (len as usize) < PROBE_HEADER_LEN {
            return Err(ProbeError::Length {
                field: len,
                have: buf.len(),
            });
        }
        Ok(ProbeHeader {
            flags,
            session: u32::from_be_bytes(bytes(buf, field::SESSION)),
            flow: u16::from_be_bytes(bytes(buf, field::FLOW)),
            len,
            seq: u32::from_be_bytes(bytes(buf, field::SEQ)),
            tx_ns: u64::from_be_bytes(bytes(buf, field::TX_TIME)),
        })
    }

    /// Rewrites only the transmit timestamp in an already encoded header:
    /// the sender stamps each packet just before the syscall without
    /// re-encoding the rest.
    pub fn stamp_tx(buf: &mut [u8], tx_ns: u64) {
        if buf.len() >= PROBE_HEADER_LEN {
            buf[field::TX_TIME].copy_from_slice(&tx_ns.to_be_bytes());
        }
    }

    /// Rewrites only the sequence number in an already encoded header.
    pub fn stamp_seq(buf: &mut [u8], seq: u32) {
        if buf.len() >= PROBE_HEADER_LEN {
            buf[field::SEQ].copy_from_slice(&seq.to_be_bytes());
        }
    }

    /// The sender asked for this probe to be reflected.
    pub fn is_rtt(&self) -> bool {
        self.flags & FLAG_RTT != 0
    }

    /// This probe is a reflection on its way back.
    pub fn is_reflected(&self) -> bool {
        self.flags & FLAG_REFLECTED != 0
    }

    /// This is a TCP data connection's identifying record, not a probe.
    pub fn is_hello(&self) -> bool {
        self.flags & FLAG_HELLO != 0
    }
}

impl Reflection {
    /// Writes the reflector's times right after the header.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), ProbeError> {
        if buf.len() < RTT_MIN_LEN {
            return Err(ProbeError::Short {
                got: buf.len(),
                need: RTT_MIN_LEN,
            });
        }
        buf[field::REFLECT_RX_TIME].copy_from_slice(&self.rx_ns.to_be_bytes());
        buf[field::REFLECT_TX_TIME].copy_from_slice(&self.tx_ns.to_be_bytes());
        Ok(())
    }

    /// Rewrites only the reflector's transmit time of an already encoded
    /// reflection: a batch of replies is stamped once, just before it
    /// leaves. Does nothing on a buffer too short to hold a reflection.
    pub fn stamp_tx(buf: &mut [u8], tx_ns: u64) {
        if buf.len() >= RTT_MIN_LEN {
            buf[field::REFLECT_TX_TIME].copy_from_slice(&tx_ns.to_be_bytes());
        }
    }

    /// Reads the reflector's times from right after the header.
    pub fn decode(buf: &[u8]) -> Result<Self, ProbeError> {
        if buf.len() < RTT_MIN_LEN {
            return Err(ProbeError::Short {
                got: buf.len(),
                need: RTT_MIN_LEN,
            });
        }
        Ok(Reflection {
            rx_ns: u64::from_be_bytes(bytes(buf, field::REFLECT_RX_TIME)),
            tx_ns: u64::from_be_bytes(bytes(buf, field::REFLECT_TX_TIME)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> ProbeHeader {
        ProbeHeader {
            flags: FLAG_RTT,
            session: 0xdead_beef,
            flow: 7,
            len: 64,
            seq: 123_456,
            tx_ns: 1_700_000_000_123_456_789,
        }
    }

    #[test]
    fn reflection_tx_stamp_rewrites_only_its_field() {
        let mut buf = [0u8; RTT_MIN_LEN];
        sample().encode(&mut buf).unwrap();
        Reflection {
            rx_ns: 11,
            tx_ns: 0,
        }
        .encode(&mut buf)
        .unwrap();
        let before = buf;
        Reflection::stamp_tx(&mut buf, 0x0102_0304_0506_0708);
        assert_eq!(
            Reflection::decode(&buf).unwrap(),
            Reflection {
                rx_ns: 11,
                tx_ns: 0x0102_0304_0506_0708
            }
        );
        assert_eq!(
            buf[..field::REFLECT_TX_TIME.start],
            before[..field::REFLECT_TX_TIME.start]
        );
        // Too short for a reflection: left alone.
        let mut short = [0u8; RTT_MIN_LEN - 1];
        Reflection::stamp_tx(&mut short, u64::MAX);
        assert_eq!(short, [0u8; RTT_MIN_LEN - 1]);
    }

    #[test]
    fn long_records_carry_their_length_after_the_header() {
        let mut buf = vec![0u8; 100_000];
        sample().encode_record(&mut buf).unwrap();
        let h = ProbeHeader::decode_prefix(&buf).unwrap();
        assert_eq!((h.flags, h.len), (FLAG_RTT | FLAG_LONG, u16::MAX));
        assert_eq!(h.record_len(&buf[..LONG_HEADER_LEN - 1]), Ok(None));
        assert_eq!(h.record_len(&buf), Ok(Some(100_000)));
        // Not a datagram: its length field cannot match.
        assert!(ProbeHeader::decode_datagram(&buf[..65_507]).is_err());
        // A short record keeps the 16-bit field, even from a header that
        // had the flag.
        let mut short = [0u8; 65_535];
        h.encode_record(&mut short).unwrap();
        let s = ProbeHeader::decode_prefix(&short).unwrap();
        assert_eq!((s.flags, s.len), (FLAG_RTT, 65_535));
        assert_eq!(s.record_len(&short[..24]), Ok(Some(65_535)));
        // Long lengths that a sender never writes lose the framing.
        for bad in [1000u32, 65_535, MAX_TCP_RECORD + 1] {
            buf[field::LONG_LEN].copy_from_slice(&bad.to_be_bytes());
            assert!(h.record_len(&buf).is_err(), "{bad}");
        }
        let mut huge = vec![0u8; MAX_TCP_RECORD as usize + 1];
        assert!(sample().encode_record(&mut huge).is_err());
    }

    #[test]
    fn round_trip() {
        let mut buf = [0u8; 64];
        sample().encode(&mut buf).unwrap();
        assert_eq!(ProbeHeader::decode(&buf).unwrap(), sample());
        assert_eq!(ProbeHeader::decode_datagram(&buf).unwrap(), sample());
    }

    #[test]
    fn stamps_rewrite_only_their_field() {
        let mut buf = [0u8; 64];
        sample().encode(&mut buf).unwrap();
        ProbeHeader::stamp_tx(&mut buf, 42);
        ProbeHeader::stamp_seq(&mut buf, 9);
        let h = ProbeHeader::decode(&buf).unwrap();
        assert_eq!(h.tx_ns, 42);
        assert_eq!(h.seq, 9);
        assert_eq!(h.session, sample().session);
    }

    #[test]
    fn short_is_rejected() {
        let mut buf = [0u8; 64];
        sample().encode(&mut buf).unwrap();
        for n in 0..PROBE_HEADER_LEN {
            assert!(matches!(
                ProbeHeader::decode(&buf[..n]),
                Err(ProbeError::Short { .. })
            ));
        }
    }

    #[test]
    fn wrong_magic_is_rejected() {
        let mut buf = [0u8; 64];
        sample().encode(&mut buf).unwrap();
        buf[0] = b'X';
        assert!(matches!(
            ProbeHeader::decode(&buf),
            Err(ProbeError::Magic(_))
        ));
    }

    #[test]
    fn wrong_version_is_rejected() {
        let mut buf = [0u8; 64];
        sample().encode(&mut buf).unwrap();
        buf[2] = 9;
        assert_eq!(ProbeHeader::decode(&buf), Err(ProbeError::Version(9)));
    }

    #[test]
    fn unknown_flags_are_rejected() {
        let mut buf = [0u8; 64];
        sample().encode(&mut buf).unwrap();
        buf[3] = 0x80;
        assert_eq!(ProbeHeader::decode(&buf), Err(ProbeError::Flags(0x80)));
    }

    #[test]
    fn bad_length_is_rejected() {
        let mut buf = [0u8; 64];
        let mut h = sample();
        h.len = 10; // below the header size
        h.encode(&mut buf).unwrap();
        assert!(matches!(
            ProbeHeader::decode(&buf),
            Err(ProbeError::Length { .. })
        ));
        h.len = 65; // more than the buffer holds
        h.encode(&mut buf).unwrap();
        assert!(matches!(
            ProbeHeader::decode(&buf),
            Err(ProbeError::Length { .. })
        ));
        h.len = 40; // datagram of 64 bytes claiming 40
        h.encode(&mut buf).unwrap();
        assert!(ProbeHeader::decode(&buf).is_ok());
        assert!(matches!(
            ProbeHeader::decode_datagram(&buf),
            Err(ProbeError::Length { .. })
        ));
    }

    #[test]
    fn reflection_round_trip_and_short() {
        let mut buf = [0u8; RTT_MIN_LEN];
        let r = Reflection { rx_ns: 5, tx_ns: 6 };
        r.encode(&mut buf).unwrap();
        assert_eq!(Reflection::decode(&buf).unwrap(), r);
        assert!(Reflection::decode(&buf[..RTT_MIN_LEN - 1]).is_err());
        assert!(r.encode(&mut buf[..30]).is_err());
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = ProbeHeader::decode(&bytes);
            let _ = ProbeHeader::decode_datagram(&bytes);
            let _ = ProbeHeader::decode_prefix(&bytes);
            let _ = Reflection::decode(&bytes);
        }

        #[test]
        fn valid_headers_round_trip(flags in 0u8..4, session: u32, flow: u16, extra in 0usize..100, seq: u32, tx_ns: u64) {
            let len = PROBE_HEADER_LEN + extra;
            let h = ProbeHeader { flags, session, flow, len: len as u16, seq, tx_ns };
            let mut buf = vec![0u8; len];
            h.encode(&mut buf).unwrap();
            prop_assert_eq!(ProbeHeader::decode_datagram(&buf).unwrap(), h);
        }

        #[test]
        fn random_bytes_with_magic_validate_fields(tail in proptest::collection::vec(any::<u8>(), 22..64)) {
            let mut bytes = vec![0x57, 0x42];
            bytes.extend_from_slice(&tail);
            if let Ok(h) = ProbeHeader::decode(&bytes) {
                prop_assert!(h.len as usize >= PROBE_HEADER_LEN);
                prop_assert!(h.len as usize <= bytes.len());
                prop_assert_eq!(bytes[2], PROBE_VERSION);
            }
        }
    }
}
