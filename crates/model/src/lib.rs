//! Traffic models: when the next packet leaves and how big it is.
//!
//! A [`FlowSpec`] describes one flow's model (inter-departure time and size
//! distributions, or an application model); [`FlowSpec::generator`] turns it
//! into a [`Generator`] with its own seeded random stream that the engine
//! asks, packet by packet, for the gap before the next departure and its
//! size. This crate knows nothing of sockets: every model can be checked by
//! running its schedule without a network.

use thiserror::Error;

/// The smallest payload a flow may carry: the probe header.
pub const MIN_PAYLOAD: u32 = 24;
/// D-ITG's largest payload; sizes are clamped to [MIN_PAYLOAD, MAX_PAYLOAD].
pub const MAX_PAYLOAD: u32 = 64000;

#[derive(Debug, Error, PartialEq)]
pub enum ModelError {
    /// `flag` names the option (e.g. `-C`, `--codec`) so the CLI can say which one is wrong.
    #[error("{flag}: {reason}")]
    BadParam { flag: String, reason: String },
}

/// One departure: wait `gap_ns` after the previous departure (absolute
/// schedule: the engine adds it to the previous *scheduled* time, never the
/// actual one), then send `size` bytes of transport payload (probe header
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    pub gap_ns: u64,
    pub size: u32,
}

/// A running model. One per flow; `Send` so each flow can run on its own thread.
pub trait Generator: Send {
    fn next(&mut self) -> Departure;
    /// How many draws were negative and clamped to zero so far.
    fn clamps(&self) -> u64 {
        0
    }
}

/// Inter-departure-time model.
#[derive(Debug, Clone, PartialEq)]
pub enum IdtModel {
    /// As fast as the path allows: no pacing.
    Max,
    /// Constant rate in packets per second (D-ITG `-C`).
    Constant { pps: f64 },
}

/// Payload-size model.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeModel {
    /// Constant size in bytes (D-ITG `-c`).
    Constant { bytes: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct FlowSpec {
    pub idt: IdtModel,
    pub size: SizeModel,
    /// Start this long after the session's start (D-ITG `-d`).
    pub start_delay_ms: u64,
}

impl FlowSpec {
    pub fn constant(pps: f64, bytes: u32) -> Result<Self, ModelError> {
        let s = FlowSpec {
            idt: IdtModel::Constant { pps },
            size: SizeModel::Constant { bytes },
            start_delay_ms: 0,
        };
        s.validate()?;
        Ok(s)
    }

    pub fn max_rate(bytes: u32) -> Result<Self, ModelError> {
        let s = FlowSpec {
            idt: IdtModel::Max,
            size: SizeModel::Constant { bytes },
            start_delay_ms: 0,
        };
        s.validate()?;
        Ok(s)
    }

    pub fn validate(&self) -> Result<(), ModelError> {
        if let IdtModel::Constant { pps } = self.idt {
            if !(pps.is_finite() && pps > 0.0) {
                return Err(ModelError::BadParam {
                    flag: "-C".into(),
                    reason: format!("rate must be a positive number of packets per second, got {pps}"),
                });
            }
        }
        let SizeModel::Constant { bytes } = self.size;
        if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&bytes) {
            return Err(ModelError::BadParam {
                flag: "-c".into(),
                reason: format!(
                    "payload must be {MIN_PAYLOAD}..={MAX_PAYLOAD} bytes (the probe header alone is {MIN_PAYLOAD}), got {bytes}"
                ),
            });
        }
        Ok(())
    }

    /// True when the flow is not paced at all (`--max`).
    pub fn is_max(&self) -> bool {
        matches!(self.idt, IdtModel::Max)
    }

    /// Mean packets per second the model asks for, if it has one.
    pub fn nominal_rate_pps(&self) -> Option<f64> {
        match self.idt {
            IdtModel::Max => None,
            IdtModel::Constant { pps } => Some(pps),
        }
    }

    /// Mean payload bytes the model asks for.
    pub fn nominal_payload_bytes(&self) -> f64 {
        let SizeModel::Constant { bytes } = self.size;
        bytes as f64
    }

    /// Largest payload this flow can produce (buffer sizing).
    pub fn max_payload(&self) -> u32 {
        let SizeModel::Constant { bytes } = self.size;
        bytes
    }

    /// Short human description, stored as `requested.model`.
    pub fn describe(&self) -> String {
        let SizeModel::Constant { bytes } = self.size;
        match self.idt {
            IdtModel::Max => format!("max rate, constant {bytes} B"),
            IdtModel::Constant { pps } => format!("constant {pps} pps, constant {bytes} B"),
        }
    }

    pub fn generator(&self, _seed: u64) -> Result<Box<dyn Generator>, ModelError> {
        self.validate()?;
        let SizeModel::Constant { bytes } = self.size;
        let gap_ns = match self.idt {
            IdtModel::Max => 0,
            IdtModel::Constant { pps } => (1e9 / pps).round() as u64,
        };
        Ok(Box::new(ConstantGen {
            dep: Departure { gap_ns, size: bytes },
        }))
    }
}

struct ConstantGen {
    dep: Departure,
}

impl Generator for ConstantGen {
    fn next(&mut self) -> Departure {
        self.dep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_schedule() {
        let s = FlowSpec::constant(1000.0, 512).unwrap();
        let mut g = s.generator(1).unwrap();
        assert_eq!(
            g.next(),
            Departure {
                gap_ns: 1_000_000,
                size: 512
            }
        );
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = FlowSpec::constant(0.0, 512).unwrap_err();
        assert!(e.to_string().starts_with("-C:"));
        let e = FlowSpec::constant(10.0, 10).unwrap_err();
        assert!(e.to_string().starts_with("-c:"));
    }
}
