//! Both halves of the authenticated `Hello` (the exchange and its MACs are
//! described in `wirebench_wire::auth`): the receiver's challenge and
//! check, and the sender's check of the receiver and its answer.
//! Nonces come from the thread-local CSPRNG (`rand`, seeded by the OS).

use crate::ctl::{Ctl, Recv};
use crate::EngineError;
use std::time::Instant;
use wirebench_wire::auth::{self, Key, ProbeKey, MAC_LEN, NONCE_LEN};
use wirebench_wire::ControlMsg;

/// What the receiver says to a sender that did not bring a key.
pub const AUTH_REQUIRED: &str =
    "authentication required: this receiver serves only senders with its key (--key-file or WIREBENCH_KEY)";
/// What the receiver says to a wrong answer. It does not say what was
/// wrong: a probe learns nothing beyond "no".
pub const AUTH_FAILED: &str = "authentication failed";

/// The receiver's side, right after a `Hello` carrying `auth` (the sender's
/// nonce) for session `sid`. Without a key there is nothing to check and
/// the sender's nonce is ignored (a sender with a key notices the missing
/// `Challenge` and stops). `Err` holds the text to send back before
/// closing. Everything must be done by `deadline`. With a key, returns the
/// session's probe key (`--auth probes`), derived from this handshake.
pub(crate) fn receiver_handshake(
    ctl: &mut Ctl,
    key: Option<&Key>,
    sid: u32,
    auth: Option<&str>,
    deadline: Instant,
) -> Result<Option<ProbeKey>, String> {
    let Some(key) = key else {
        return Ok(None);
    };
    let Some(cn) = auth else {
        return Err(AUTH_REQUIRED.into());
    };
    let cn: [u8; NONCE_LEN] = auth::from_hex("auth", cn).map_err(|e| format!("bad Hello: {e}"))?;
    let sn: [u8; NONCE_LEN] = rand::random();
    ctl.send(&ControlMsg::Challenge {
        nonce: auth::to_hex(&sn),
        proof: auth::to_hex(&key.receiver_proof(&cn, &sn, sid)),
    })
    .map_err(|e| e.to_string())?;
    let left = deadline.saturating_duration_since(Instant::now());
    match ctl.recv(left) {
        Ok(Recv::Msg(ControlMsg::Auth { mac })) => {
            let ok = auth::from_hex::<MAC_LEN>("mac", &mac)
                .is_ok_and(|m| key.verify_sender(&cn, &sn, sid, &m));
            if ok {
                Ok(Some(key.probe_key(&cn, &sn, sid)))
            } else {
                Err(AUTH_FAILED.into())
            }
        }
        Ok(Recv::Timeout) => Err(format!(
            "no Auth within the {:.0} s handshake time",
            crate::recv::HELLO_TIMEOUT.as_secs_f64()
        )),
        Ok(_) | Err(_) => Err(AUTH_FAILED.into()),
    }
}

/// The sender's nonce for an authenticating `Hello` (None without a key).
pub(crate) fn sender_nonce(key: Option<&Key>) -> Option<[u8; NONCE_LEN]> {
    key.map(|_| rand::random())
}

/// The sender's side: `reply` is the receiver's first answer to `Hello`.
/// With a key it must be a `Challenge` whose proof checks out; the answer
/// is sent and the receiver's next message (its `Ready`) returned with the
/// session's probe key (`--auth probes`). Without a key, a `Challenge`
/// means the receiver wants one.
pub(crate) fn sender_handshake(
    ctl: &mut Ctl,
    key: Option<&Key>,
    cn: Option<[u8; NONCE_LEN]>,
    sid: u32,
    reply: ControlMsg,
    timeout: std::time::Duration,
) -> Result<(ControlMsg, Option<ProbeKey>), EngineError> {
    match (key, cn, reply) {
        (Some(key), Some(cn), ControlMsg::Challenge { nonce, proof }) => {
            let sn: [u8; NONCE_LEN] = auth::from_hex("nonce", &nonce)
                .map_err(|e| EngineError::Protocol(format!("bad Challenge: {e}")))?;
            let proof_ok = auth::from_hex::<MAC_LEN>("proof", &proof)
                .is_ok_and(|p| key.verify_receiver(&cn, &sn, sid, &p));
            if !proof_ok {
                return Err(EngineError::Protocol(
                    "the receiver failed authentication: it does not hold the same key".into(),
                ));
            }
            ctl.send(&ControlMsg::Auth {
                mac: auth::to_hex(&key.sender_mac(&cn, &sn, sid)),
            })?;
            let ready = ctl.expect("Ready", timeout)?;
            Ok((ready, Some(key.probe_key(&cn, &sn, sid))))
        }
        (Some(_), _, ControlMsg::Ready { .. }) => Err(EngineError::Protocol(
            "the receiver did not authenticate (it runs without a key); not sending to it with --key-file/WIREBENCH_KEY".into(),
        )),
        (None, _, ControlMsg::Challenge { .. }) => Err(EngineError::Remote(
            "the receiver requires authentication: give its key with --key-file or WIREBENCH_KEY".into(),
        )),
        (_, _, other) => Ok((other, None)),
    }
}
