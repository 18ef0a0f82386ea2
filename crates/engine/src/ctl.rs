//! The control connection: JSON lines over TCP with a bounded line length
//! and read deadlines, so that neither side can be hung by a silent or
//! hostile peer.

use crate::EngineError;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use wirebench_wire::control::MAX_CONTROL_LINE;
use wirebench_wire::ControlMsg;

pub struct Ctl {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// What a read with a deadline produced.
pub enum Recv {
    Msg(ControlMsg),
    /// Nothing complete arrived before the deadline.
    Timeout,
    /// The peer closed the connection.
    Closed,
}

impl Ctl {
    pub fn new(stream: TcpStream) -> Self {
        let _ = stream.set_nodelay(true);
        Ctl {
            stream,
            buf: Vec::with_capacity(4096),
        }
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub fn try_clone_stream(&self) -> Result<TcpStream, EngineError> {
        self.stream
            .try_clone()
            .map_err(|e| EngineError::io("control socket", e))
    }

    pub fn send(&mut self, msg: &ControlMsg) -> Result<(), EngineError> {
        self.stream
            .write_all(msg.to_line().as_bytes())
            .map_err(|e| EngineError::PeerGone(format!("control write failed: {e}")))
    }

    /// Reads one message, waiting at most `timeout`. Malformed lines are an
    /// error (the caller decides whether that is foreign traffic).
    pub fn recv(&mut self, timeout: Duration) -> Result<Recv, EngineError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line);
                if text.trim().is_empty() {
                    continue;
                }
                return ControlMsg::from_line(&text)
                    .map(Recv::Msg)
                    .map_err(|e| EngineError::Protocol(e.to_string()));
            }
            if self.buf.len() > MAX_CONTROL_LINE {
                return Err(EngineError::Protocol(format!(
                    "control line longer than {MAX_CONTROL_LINE} bytes"
                )));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Recv::Timeout);
            }
            let _ = self
                .stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(Recv::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(Recv::Timeout)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                    ) {
                        return Ok(Recv::Closed);
                    }
                    return Err(EngineError::PeerGone(format!("control read failed: {e}")));
                }
            }
        }
    }

    /// Reads until a message arrives; a timeout or close is an error naming
    /// what was awaited.
    pub fn expect(&mut self, what: &str, timeout: Duration) -> Result<ControlMsg, EngineError> {
        match self.recv(timeout)? {
            Recv::Msg(ControlMsg::Error { message }) => Err(EngineError::Remote(message)),
            Recv::Msg(m) => Ok(m),
            Recv::Timeout => Err(EngineError::PeerGone(format!(
                "no {what} from the peer within {:.1} s",
                timeout.as_secs_f64()
            ))),
            Recv::Closed => Err(EngineError::PeerGone(format!(
                "peer closed the control connection while waiting for {what}"
            ))),
        }
    }
}
