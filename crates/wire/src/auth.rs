//! Session authentication: a pre-shared key and an HMAC-SHA256
//! challenge–response at `Hello`, modelled on OWAMP/TWAMP's authenticated
//! mode (RFC 4656 §3.1, RFC 5357), plus the `--allow` address lists.
//!
//! The exchange (only when the sender has a key):
//!
//! ```text
//! sender   → Hello { .., auth: Some(cn) }          cn: 16 random bytes
//! receiver → Challenge { nonce: sn, proof }        proof = HMAC(k, "recv" | cn | sn | sid)
//! sender   → Auth { mac }                          mac   = HMAC(k, "send" | cn | sn | sid)
//! receiver → Ready { .. }  (or Error "authentication failed")
//! ```
//!
//! No secret crosses the wire, both sides prove the key (a receiver without
//! it cannot pose as the real one), and every session needs a fresh
//! receiver nonce, so a recorded exchange replayed on a new connection
//! fails. The two directions use different labels, so the receiver's proof
//! can never be echoed back as the sender's answer. This crate only computes
//! and checks; sockets and nonces from a random source are the engine's.

use crate::probe::{field, FLAG_REFLECTED, PROBE_HEADER_LEN, RTT_MIN_LEN};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use thiserror::Error;

/// Bytes of each nonce (128 bits, as OWAMP's challenge).
pub const NONCE_LEN: usize = 16;
/// Bytes of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// Shortest key accepted: a shorter shared secret is guessable offline
/// from one recorded exchange.
pub const MIN_KEY_LEN: usize = 16;
/// Longest key accepted (a key file is read whole).
pub const MAX_KEY_LEN: usize = 4096;
/// Environment variable that may hold the key (never the command line,
/// where every user of the host can read it).
pub const KEY_ENV: &str = "WIREBENCH_KEY";

const LABEL: &[u8] = b"wirebench-auth/1 ";

/// Bytes of the truncated HMAC-SHA256 trailer of an authenticated probe
/// (`--auth probes`): 128 bits, as TWAMP's authenticated mode keeps.
pub const PROBE_MAC_LEN: usize = 16;
/// Smallest authenticated probe: the header and the MAC.
pub const AUTH_PROBE_MIN_LEN: usize = PROBE_HEADER_LEN + PROBE_MAC_LEN;
/// Smallest authenticated reflection: header, the reflector's two times
/// and the MAC.
pub const AUTH_RTT_MIN_LEN: usize = RTT_MIN_LEN + PROBE_MAC_LEN;

/// A key, hex field or address block that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuthError {
    /// The key (whitespace trimmed) is shorter than [`MIN_KEY_LEN`].
    #[error("key is {0} bytes; at least {MIN_KEY_LEN} are needed")]
    KeyTooShort(usize),
    /// The key is longer than [`MAX_KEY_LEN`].
    #[error("key is {0} bytes; at most {MAX_KEY_LEN} are accepted")]
    KeyTooLong(usize),
    /// A nonce or MAC field is not `len` bytes of hex.
    #[error("{field}: expected {len} bytes as hex")]
    BadHex {
        /// The message field.
        field: &'static str,
        /// The bytes expected.
        len: usize,
    },
    /// An `--allow` entry that is neither an address nor a block.
    #[error("{0}: not an address or CIDR block (e.g. 192.0.2.0/24, 2001:db8::/32)")]
    BadCidr(String),
}

/// The pre-shared key. Its bytes are never printed (`Debug` hides them).
#[derive(Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({} bytes)", self.0.len())
    }
}

impl Key {
    /// A key from the contents of a key file or the environment variable:
    /// surrounding whitespace (the final newline of an editor) is not part
    /// of it.
    pub fn from_text(bytes: &[u8]) -> Result<Key, AuthError> {
        let start = bytes
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(bytes.len());
        let end = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(start, |p| p + 1);
        let k = &bytes[start..end];
        if k.len() < MIN_KEY_LEN {
            return Err(AuthError::KeyTooShort(k.len()));
        }
        if k.len() > MAX_KEY_LEN {
            return Err(AuthError::KeyTooLong(k.len()));
        }
        Ok(Key(k.to_vec()))
    }

    fn tag(
        &self,
        role: &[u8],
        cn: &[u8; NONCE_LEN],
        sn: &[u8; NONCE_LEN],
        sid: u32,
    ) -> Hmac<Sha256> {
        // HMAC takes keys of any length; this cannot fail.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        m.update(LABEL);
        m.update(role);
        m.update(cn);
        m.update(sn);
        m.update(&sid.to_be_bytes());
        m
    }

    /// The receiver's proof that it holds the key.
    pub fn receiver_proof(
        &self,
        cn: &[u8; NONCE_LEN],
        sn: &[u8; NONCE_LEN],
        sid: u32,
    ) -> [u8; MAC_LEN] {
        self.tag(b"recv", cn, sn, sid)
            .finalize()
            .into_bytes()
            .into()
    }

    /// The sender's answer to the receiver's challenge.
    pub fn sender_mac(
        &self,
        cn: &[u8; NONCE_LEN],
        sn: &[u8; NONCE_LEN],
        sid: u32,
    ) -> [u8; MAC_LEN] {
        self.tag(b"send", cn, sn, sid)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Checks a receiver's proof in constant time.
    pub fn verify_receiver(
        &self,
        cn: &[u8; NONCE_LEN],
        sn: &[u8; NONCE_LEN],
        sid: u32,
        proof: &[u8],
    ) -> bool {
        self.tag(b"recv", cn, sn, sid).verify_slice(proof).is_ok()
    }

    /// The session's probe key (`--auth probes`): both ends derive it from
    /// the handshake they just completed, so it is fresh per session and
    /// never on the wire.
    pub fn probe_key(&self, cn: &[u8; NONCE_LEN], sn: &[u8; NONCE_LEN], sid: u32) -> ProbeKey {
        let k = self.tag(b"probe", cn, sn, sid).finalize().into_bytes();
        ProbeKey {
            mac: <Hmac<Sha256> as Mac>::new_from_slice(&k)
                .unwrap_or_else(|_| unreachable!("HMAC accepts any key length")),
        }
    }

    /// Checks a sender's answer in constant time.
    pub fn verify_sender(
        &self,
        cn: &[u8; NONCE_LEN],
        sn: &[u8; NONCE_LEN],
        sid: u32,
        mac: &[u8],
    ) -> bool {
        self.tag(b"send", cn, sn, sid).verify_slice(mac).is_ok()
    }
}

/// A session's key for probe MACs (`--auth probes`).
///
/// Every authenticated probe ends in a [`PROBE_MAC_LEN`]-byte trailer:
/// HMAC-SHA256 under this key over the header (24 bytes) or, for a
/// reflection (`FLAG_REFLECTED`, covered by the MAC), over the header and
/// the reflector's two times (40 bytes), truncated. Everything the
/// figures rest on (session, flow, length, sequence number, times) is
/// covered; the padding between is filler. The keyed state is cloned per
/// probe: no allocation, two SHA-256 compressions.
#[derive(Clone)]
pub struct ProbeKey {
    mac: Hmac<Sha256>,
}

impl fmt::Debug for ProbeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProbeKey(..)")
    }
}

impl ProbeKey {
    /// The bytes a probe's MAC covers, or None when `buf` (the whole
    /// datagram or record) is too short to carry them and the trailer.
    fn covered(buf: &[u8]) -> Option<(&[u8], &[u8])> {
        let n = if buf.len() > field::FLAGS && buf[field::FLAGS] & FLAG_REFLECTED != 0 {
            RTT_MIN_LEN
        } else {
            PROBE_HEADER_LEN
        };
        if buf.len() < n + PROBE_MAC_LEN {
            return None;
        }
        Some((&buf[..n], &buf[buf.len() - PROBE_MAC_LEN..]))
    }

    /// Writes the MAC into the last [`PROBE_MAC_LEN`] bytes of the probe
    /// `buf` (header, and times for a reflection, already final). False
    /// when `buf` is too short to hold it.
    pub fn sign(&self, buf: &mut [u8]) -> bool {
        let Some((covered, _)) = Self::covered(buf) else {
            return false;
        };
        let mut m = self.mac.clone();
        m.update(covered);
        let tag = m.finalize().into_bytes();
        let at = buf.len() - PROBE_MAC_LEN;
        buf[at..].copy_from_slice(&tag[..PROBE_MAC_LEN]);
        true
    }

    /// True when the probe `buf` ends in a valid MAC (constant-time).
    pub fn verify(&self, buf: &[u8]) -> bool {
        let Some((covered, tag)) = Self::covered(buf) else {
            return false;
        };
        let mut m = self.mac.clone();
        m.update(covered);
        m.verify_truncated_left(tag).is_ok()
    }
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(D[usize::from(b >> 4)]));
        s.push(char::from(D[usize::from(b & 15)]));
    }
    s
}

/// Exactly `N` bytes from hex (either case); `field` names the message
/// field in the error.
pub fn from_hex<const N: usize>(field: &'static str, s: &str) -> Result<[u8; N], AuthError> {
    let bad = || AuthError::BadHex { field, len: N };
    let s = s.as_bytes();
    if s.len() != 2 * N {
        return Err(bad());
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        let (Some(h), Some(l)) = (nib(s[2 * i]), nib(s[2 * i + 1])) else {
            return Err(bad());
        };
        *o = (h << 4) | l;
    }
    Ok(out)
}

/// An address block of `--allow` (a bare address is a block of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// True when `ip` is in the block. An IPv4-mapped IPv6 address is
    /// matched as the IPv4 address it maps.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Cidr, AuthError> {
        let bad = || AuthError::BadCidr(s.to_string());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .trim_matches(|c| c == '[' || c == ']')
            .parse()
            .map_err(|_| bad())?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p.parse::<u8>().ok().filter(|&p| p <= max).ok_or_else(bad)?,
        };
        Ok(Cidr { net, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::from_text(s.as_bytes()).unwrap()
    }

    #[test]
    fn key_text_is_trimmed_and_bounded() {
        assert_eq!(key("  0123456789abcdef\n"), key("0123456789abcdef"));
        assert_eq!(Key::from_text(b"short\n"), Err(AuthError::KeyTooShort(5)));
        assert!(Key::from_text(&[b'k'; MAX_KEY_LEN + 1]).is_err());
        assert!(!format!("{:?}", key("0123456789abcdef")).contains("0123"));
    }

    #[test]
    fn macs_bind_key_nonces_session_and_direction() {
        let k = key("0123456789abcdef");
        let (cn, sn) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let proof = k.receiver_proof(&cn, &sn, 7);
        let mac = k.sender_mac(&cn, &sn, 7);
        assert!(k.verify_receiver(&cn, &sn, 7, &proof));
        assert!(k.verify_sender(&cn, &sn, 7, &mac));
        // The receiver's proof is not a valid sender answer (no reflection).
        assert!(!k.verify_sender(&cn, &sn, 7, &proof));
        // Another key, session, or either nonce: refused.
        assert!(!key("0123456789abcdeF").verify_sender(&cn, &sn, 7, &mac));
        assert!(!k.verify_sender(&cn, &sn, 8, &mac));
        assert!(!k.verify_sender(&cn, &[3u8; NONCE_LEN], 7, &mac));
        assert!(!k.verify_sender(&[3u8; NONCE_LEN], &sn, 7, &mac));
        assert!(!k.verify_sender(&cn, &sn, 7, &mac[..31]));
    }

    #[test]
    fn probe_macs_cover_header_and_reflection_times() {
        use crate::probe::{ProbeHeader, Reflection};
        let k = key("0123456789abcdef");
        let (cn, sn) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let pk = k.probe_key(&cn, &sn, 7);
        let mut buf = [0u8; 64];
        let h = ProbeHeader {
            session: 7,
            flow: 1,
            len: 64,
            seq: 9,
            tx_ns: 5,
            ..Default::default()
        };
        h.encode(&mut buf).unwrap();
        assert!(pk.sign(&mut buf));
        assert!(pk.verify(&buf));
        // Padding is not covered; every header byte and the tag are.
        let mut pad = buf;
        pad[30] ^= 1;
        assert!(pk.verify(&pad));
        for i in (0..PROBE_HEADER_LEN).chain(64 - PROBE_MAC_LEN..64) {
            let mut bad = buf;
            bad[i] ^= 0x10;
            assert!(!pk.verify(&bad), "byte {i} not covered");
        }
        // Another session's key (other nonces or id) does not verify it.
        assert!(!k.probe_key(&cn, &[3; NONCE_LEN], 7).verify(&buf));
        assert!(!k.probe_key(&cn, &sn, 8).verify(&buf));
        // A reflection covers the reflector's times too.
        let mut r = [0u8; AUTH_RTT_MIN_LEN];
        ProbeHeader {
            flags: FLAG_REFLECTED,
            len: AUTH_RTT_MIN_LEN as u16,
            ..h
        }
        .encode(&mut r)
        .unwrap();
        Reflection { rx_ns: 1, tx_ns: 2 }.encode(&mut r).unwrap();
        assert!(pk.sign(&mut r));
        assert!(pk.verify(&r));
        r[35] ^= 1;
        assert!(!pk.verify(&r));
        // Too short to carry a MAC: never valid, never signed.
        assert!(!pk.verify(&buf[..AUTH_PROBE_MIN_LEN - 1]));
        assert!(!pk.sign(&mut r[..AUTH_RTT_MIN_LEN - 1]));
    }

    #[test]
    fn hex_round_trip_and_errors() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(to_hex(&b), "0001abff");
        assert_eq!(from_hex::<4>("x", "0001ABff"), Ok(b));
        assert!(from_hex::<4>("x", "0001abf").is_err());
        assert!(from_hex::<4>("x", "0001abfg").is_err());
        assert!(from_hex::<4>("x", "é001abff").is_err());
    }

    #[test]
    fn cidr_blocks() {
        let c: Cidr = "192.0.2.0/24".parse().unwrap();
        assert!(c.contains("192.0.2.200".parse().unwrap()));
        assert!(c.contains("::ffff:192.0.2.1".parse().unwrap()));
        assert!(!c.contains("192.0.3.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        let v6: Cidr = "[2001:db8::]/32".parse().unwrap();
        assert!(v6.contains("2001:db8:1::1".parse().unwrap()));
        assert!(!v6.contains("2001:db9::1".parse().unwrap()));
        assert_eq!(v6.to_string(), "2001:db8::/32");
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "::/129",
            "host",
            "10.0.0.0/x",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
