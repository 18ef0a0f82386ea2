//! iperf3's wire format: the cookie, the one-byte control states, the
//! length-prefixed JSON messages and the UDP datagram header. Learnt from
//! iperf3's man page and from watching iperf3 3.12 talk to itself on
//! loopback (docs/iperf3.md); both ends of wirebench use this one module.

use crate::Iperf3Error;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// A session cookie: 36 printable characters and a NUL, sent first on the
/// control connection and on every TCP data connection.
pub const COOKIE_LEN: usize = 37;
/// Longest JSON message accepted (parameters or results); iperf3's own
/// are a few hundred bytes, results of 128 streams some 20 KiB.
pub const MAX_JSON: usize = 256 << 10;
/// Most parallel streams a client may ask for (iperf3's own limit).
pub const MAX_STREAMS: u32 = 128;
/// Largest TCP block (iperf3's MAX_BLOCKSIZE).
pub const MAX_TCP_BLOCK: u32 = 1 << 20;
/// Largest UDP datagram payload over IPv4.
pub const MAX_UDP_BLOCK: u32 = 65_507;
/// The 4-byte datagram an iperf3 client sends to open a UDP stream: the
/// number 0x36373839 in the client's byte order ("9876" on little-endian
/// hosts); the answer is 0x39383736 in the same order.
pub const UDP_CONNECT_LE: [u8; 4] = *b"9876";
/// What a big-endian iperf3 client sends.
pub const UDP_CONNECT_BE: [u8; 4] = *b"6789";

/// The answer to a UDP connect datagram: the other number in the byte
/// order the client used.
pub fn udp_connect_reply(msg: [u8; 4]) -> Option<[u8; 4]> {
    match msg {
        UDP_CONNECT_LE => Some(UDP_CONNECT_BE),
        UDP_CONNECT_BE => Some(UDP_CONNECT_LE),
        _ => None,
    }
}

/// The control states, one signed byte each on the control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// `TEST_START` (1): the streams are open, the test is about to run.
    TestStart,
    /// `TEST_RUNNING` (2): data flows.
    TestRunning,
    /// `TEST_END` (4): the client's timer (or byte/block count) ended the test.
    TestEnd,
    /// `PARAM_EXCHANGE` (9): the client is to send its parameters.
    ParamExchange,
    /// `CREATE_STREAMS` (10): the client is to open its streams.
    CreateStreams,
    /// `SERVER_TERMINATE` (11): the server stops the test early.
    ServerTerminate,
    /// `CLIENT_TERMINATE` (12): the client stops the test early.
    ClientTerminate,
    /// `EXCHANGE_RESULTS` (13): each side sends its results JSON.
    ExchangeResults,
    /// `DISPLAY_RESULTS` (14): the results are in; the client prints them.
    DisplayResults,
    /// `IPERF_START` (15): not sent on the wire by 3.x.
    IperfStart,
    /// `IPERF_DONE` (16): the client's last word.
    IperfDone,
    /// `ACCESS_DENIED` (−1): the server is busy.
    AccessDenied,
    /// `SERVER_ERROR` (−2), followed by iperf3's error number and errno.
    ServerError,
}

impl State {
    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfStart => 15,
            State::IperfDone => 16,
            State::AccessDenied => (-1i8) as u8,
            State::ServerError => (-2i8) as u8,
        }
    }

    /// The state a byte stands for; None for one iperf3 never sends.
    pub fn from_byte(b: u8) -> Option<State> {
        Some(match b as i8 {
            1 => State::TestStart,
            2 => State::TestRunning,
            4 => State::TestEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            15 => State::IperfStart,
            16 => State::IperfDone,
            -1 => State::AccessDenied,
            -2 => State::ServerError,
            _ => return None,
        })
    }
}

/// iperf3 error numbers a server sends after `ServerError` (the client
/// prints its own text for each).
pub mod errno {
    /// "not implemented yet".
    pub const UNIMPLEMENTED: i32 = 13;
    /// "no SCTP support available".
    pub const NO_SCTP: i32 = 18;
    /// "test authorization failed".
    pub const AUTH_FAILED: i32 = 142;
    /// "number of parallel streams too large".
    pub const TOO_MANY_STREAMS: i32 = 6;
    /// "block size too large".
    pub const BLOCK_SIZE: i32 = 7;
    /// "test duration too long".
    pub const DURATION: i32 = 5;
}

/// A fresh random cookie (iperf3 uses the same 32-letter alphabet).
pub fn new_cookie() -> [u8; COOKIE_LEN] {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut rng = rand::rng();
    let mut c = [0u8; COOKIE_LEN];
    for b in c.iter_mut().take(COOKIE_LEN - 1) {
        *b = ALPHABET[rng.random_range(0..ALPHABET.len())];
    }
    c
}

/// What an iperf3 client asks for (`PARAM_EXCHANGE`). Keys not listed are
/// accepted and ignored, as iperf3's own server does.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Params {
    /// `tcp`: TCP streams (the default when neither is set).
    #[serde(skip_serializing_if = "std::ops::Not::not", deserialize_with = "flag")]
    pub tcp: bool,
    /// `-u`: UDP streams.
    #[serde(skip_serializing_if = "std::ops::Not::not", deserialize_with = "flag")]
    pub udp: bool,
    /// `--sctp`: SCTP streams (refused by wirebench).
    #[serde(skip_serializing_if = "std::ops::Not::not", deserialize_with = "flag")]
    pub sctp: bool,
    /// `-O`: seconds at the start that the client leaves out of its figures.
    pub omit: u64,
    /// Test length in seconds (0 with `-n`/`-k`).
    pub time: u64,
    /// `-n`: bytes to send (0: not set).
    pub num: u64,
    /// `-k`: blocks to send (0: not set).
    pub blockcount: u64,
    /// `-P`: streams per direction.
    pub parallel: u32,
    /// `-R`: the server sends.
    #[serde(skip_serializing_if = "std::ops::Not::not", deserialize_with = "flag")]
    pub reverse: bool,
    /// `--bidir`: both sides send, `parallel` streams each.
    #[serde(skip_serializing_if = "std::ops::Not::not", deserialize_with = "flag")]
    pub bidirectional: bool,
    /// `-l`: bytes per write (TCP) or per datagram (UDP).
    pub len: u32,
    /// `-b`: bits per second per stream (0: unlimited).
    #[serde(skip_serializing_if = "is_zero")]
    pub bandwidth: u64,
    /// `--pacing-timer`: the sender's pacing tick, microseconds.
    #[serde(skip_serializing_if = "is_zero")]
    pub pacing_timer: u64,
    /// `--udp-counters-64bit`: 64-bit sequence numbers in UDP datagrams.
    #[serde(skip_serializing_if = "std::ops::Not::not", deserialize_with = "flag")]
    pub udp_counters_64bit: bool,
    /// `--get-server-output`: the server adds its own text to its results.
    #[serde(skip_serializing_if = "std::ops::Not::not", deserialize_with = "flag")]
    pub get_server_output: bool,
    /// Present when the client authenticates with RSA (`--username`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authtoken: Option<serde_json::Value>,
    /// The client's version string (iperf3 3.x sends its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
}

/// iperf3 writes some switches as `true` and others as `1`.
fn flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Bool(b) => b,
        serde_json::Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        _ => false,
    })
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A retransmission count where iperf3 writes −1 as 2^64 − 1 for "not known".
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Retransmits(pub Option<u64>);

impl Serialize for Retransmits {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0.unwrap_or(u64::MAX))
    }
}

impl<'de> Deserialize<'de> for Retransmits {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(Retransmits(v.as_u64().filter(|&n| n != u64::MAX)))
    }
}

/// One stream's figures in `EXCHANGE_RESULTS`, from the side that writes them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct StreamResult {
    /// Stream id ([`stream_id`]).
    pub id: i64,
    /// Bytes this side sent (its sending streams) or received.
    pub bytes: u64,
    /// TCP retransmissions of a stream this side sent.
    pub retransmits: Retransmits,
    /// RFC 3550 jitter of a UDP stream this side received, seconds.
    pub jitter: f64,
    /// UDP datagrams this side found missing.
    pub errors: i64,
    /// UDP datagrams: sent, or (receiving) the highest sequence number seen.
    pub packets: i64,
    /// Seconds from the test's start to the stream's first figure.
    pub start_time: f64,
    /// Seconds from the test's start to the stream's last figure.
    pub end_time: f64,
}

/// One side's results (`EXCHANGE_RESULTS`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Results {
    /// This side's CPU use during the test, per cent of one CPU.
    pub cpu_util_total: f64,
    /// ... of it in user space.
    pub cpu_util_user: f64,
    /// ... of it in the kernel.
    pub cpu_util_system: f64,
    /// 1 when this side sent TCP and can count retransmissions, unknown else.
    pub sender_has_retransmits: Retransmits,
    /// The TCP congestion control this side's streams used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    /// One entry per stream, this side's figures.
    pub streams: Vec<StreamResult>,
    /// The server's own text (`--get-server-output`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
}

/// Reads one state byte.
pub fn read_state(r: &mut impl Read) -> Result<State, Iperf3Error> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b).map_err(Iperf3Error::control)?;
    State::from_byte(b[0]).ok_or(Iperf3Error::Protocol(format!(
        "unknown control state {}",
        b[0] as i8
    )))
}

/// Writes one state byte.
pub fn write_state(w: &mut impl Write, s: State) -> Result<(), Iperf3Error> {
    w.write_all(&[s.byte()]).map_err(Iperf3Error::control)
}

/// `ServerError` followed by iperf3's error number and errno 0.
pub fn write_server_error(w: &mut impl Write, errno: i32) -> Result<(), Iperf3Error> {
    let mut m = [0u8; 9];
    m[0] = State::ServerError.byte();
    m[1..5].copy_from_slice(&errno.to_be_bytes());
    w.write_all(&m).map_err(Iperf3Error::control)
}

/// Reads a 4-byte big-endian length and that much JSON.
pub fn read_json<T: serde::de::DeserializeOwned>(
    r: &mut impl Read,
    what: &str,
) -> Result<T, Iperf3Error> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(Iperf3Error::control)?;
    let n = u32::from_be_bytes(len) as usize;
    if n == 0 || n > MAX_JSON {
        return Err(Iperf3Error::Protocol(format!(
            "{what}: JSON of {n} bytes (at most {MAX_JSON})"
        )));
    }
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).map_err(Iperf3Error::control)?;
    serde_json::from_slice(&buf).map_err(|e| Iperf3Error::Protocol(format!("{what}: {e}")))
}

/// Writes `v` as JSON behind its 4-byte big-endian length.
pub fn write_json<T: Serialize>(w: &mut impl Write, v: &T) -> Result<(), Iperf3Error> {
    let body = serde_json::to_vec(v).map_err(|e| Iperf3Error::Protocol(e.to_string()))?;
    let mut msg = Vec::with_capacity(body.len() + 4);
    msg.extend_from_slice(&(body.len() as u32).to_be_bytes());
    msg.extend_from_slice(&body);
    w.write_all(&msg).map_err(Iperf3Error::control)
}

/// The header iperf3 puts at the start of every UDP datagram, big-endian:
/// seconds and microseconds of the send time, then the sequence number
/// (from 1), 32 bits or, with `--udp-counters-64bit`, 64.
pub mod udp_header {
    use std::ops::Range;
    const SEC: Range<usize> = 0..4;
    const USEC: Range<usize> = 4..8;
    const SEQ32: Range<usize> = 8..12;
    const SEQ64: Range<usize> = 8..16;

    /// Header length with 32- or 64-bit counters.
    pub const fn len(wide: bool) -> usize {
        if wide {
            SEQ64.end
        } else {
            SEQ32.end
        }
    }

    /// Send time (ns) and sequence number, or None when `buf` is too short.
    pub fn read(buf: &[u8], wide: bool) -> Option<(u64, u64)> {
        if buf.len() < len(wide) {
            return None;
        }
        let u32_at = |r: Range<usize>| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&buf[r]);
            u32::from_be_bytes(b)
        };
        let ns = u64::from(u32_at(SEC)) * 1_000_000_000 + u64::from(u32_at(USEC)) * 1_000;
        let seq = if wide {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[SEQ64]);
            u64::from_be_bytes(b)
        } else {
            u64::from(u32_at(SEQ32))
        };
        Some((ns, seq))
    }

    /// Writes the header for send time `ns` and sequence `seq`; `buf` must
    /// hold [`len`] bytes.
    pub fn write(buf: &mut [u8], ns: u64, seq: u64, wide: bool) {
        let sec = (ns / 1_000_000_000) as u32;
        let usec = ((ns % 1_000_000_000) / 1_000) as u32;
        buf[SEC].copy_from_slice(&sec.to_be_bytes());
        buf[USEC].copy_from_slice(&usec.to_be_bytes());
        if wide {
            buf[SEQ64].copy_from_slice(&seq.to_be_bytes());
        } else {
            buf[SEQ32].copy_from_slice(&(seq as u32).to_be_bytes());
        }
    }
}

/// iperf3's stream ids: the first stream is 1, the n-th (n ≥ 2) is n + 1.
pub fn stream_id(index: usize) -> i64 {
    if index == 0 {
        1
    } else {
        index as i64 + 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_short_buffers() {
        let mut b = [0u8; 16];
        udp_header::write(&mut b, 518_255_157_000, 7, false);
        assert_eq!(&b[..12], b"\0\0\x02\x06\0\x03\xe4\xb5\0\0\0\x07");
        assert_eq!(udp_header::read(&b, false), Some((518_255_157_000, 7)));
        udp_header::write(&mut b, 5_000_001_000, 1 << 40, true);
        assert_eq!(udp_header::read(&b, true), Some((5_000_001_000, 1 << 40)));
        assert_eq!(udp_header::read(&b[..11], false), None);
        assert_eq!(udp_header::read(&b[..15], true), None);
    }

    #[test]
    fn states_and_ids() {
        for s in [State::TestEnd, State::AccessDenied, State::ServerError] {
            assert_eq!(State::from_byte(s.byte()), Some(s));
        }
        assert_eq!(State::from_byte(3), None);
        assert_eq!((0..4).map(stream_id).collect::<Vec<_>>(), vec![1, 3, 4, 5]);
        assert_eq!(udp_connect_reply(*b"9876"), Some(*b"6789"));
        assert_eq!(udp_connect_reply(*b"abcd"), None);
    }

    #[test]
    fn params_and_results_as_iperf3_3_12_writes_them() {
        let p: Params = serde_json::from_str(
            r#"{"udp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":1,"len":100,"bandwidth":1000000,"pacing_timer":1000,"client_version":"3.12"}"#,
        )
        .unwrap();
        assert!(p.udp && !p.tcp && p.len == 100 && p.bandwidth == 1_000_000);
        let wide: Params = serde_json::from_str(r#"{"udp":true,"udp_counters_64bit":1}"#).unwrap();
        assert!(wide.udp_counters_64bit);
        let r: Results = serde_json::from_str(
            r#"{"cpu_util_total":2.0,"cpu_util_user":0,"cpu_util_system":2.0,"sender_has_retransmits":18446744073709551615,"streams":[{"id":1,"bytes":125000,"retransmits":18446744073709551615,"jitter":1.05e-05,"errors":0,"packets":1250,"start_time":0,"end_time":1.001474}]}"#,
        )
        .unwrap();
        assert_eq!(r.sender_has_retransmits, Retransmits(None));
        assert_eq!(r.streams[0].packets, 1250);
        let back = serde_json::to_string(&r).unwrap();
        assert!(back.contains("\"retransmits\":18446744073709551615"));
        let mut msg = Vec::new();
        write_json(&mut msg, &r).unwrap();
        assert_eq!(
            u32::from_be_bytes(msg[..4].try_into().unwrap()) as usize,
            msg.len() - 4
        );
        let again: Results = read_json(&mut msg.as_slice(), "results").unwrap();
        assert_eq!(again, r);
        let mut huge = (MAX_JSON as u32 + 1).to_be_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(read_json::<Results>(&mut huge.as_slice(), "results").is_err());
    }
}
