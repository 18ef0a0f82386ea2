//! The one generator behind every model: IDT draw, ON/OFF bursts, size draw,
//! frame packetization and the transfer budget, each with its own ChaCha
//! stream so that changing the size law never changes the departure times.

use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::dist::Sampler;
use crate::{
    Departure, FlowSpec, Generator, IdtModel, SizeModel, MAX_GAP_NS, MAX_PAYLOAD, MAX_RECORD,
    MIN_PAYLOAD,
};

/// Stream `stream` of the ChaCha generator keyed by `seed`.
pub(crate) fn rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

enum Idt {
    Max,
    /// Constant gap in ns, fractional part carried so long schedules keep
    /// the exact rate.
    Const(f64),
    Random(Sampler),
}

enum Size {
    Const(u32),
    Random(Sampler),
}

struct BurstState {
    on: Sampler,
    off: Sampler,
    /// ns left in the current ON period.
    on_left: f64,
}

pub(crate) struct ModelGen {
    idt: Idt,
    size: Size,
    burst: Option<BurstState>,
    packetize: Option<u32>,
    transfer_left: Option<u64>,
    r_idt: ChaCha8Rng,
    r_size: ChaCha8Rng,
    r_burst: ChaCha8Rng,
    /// Bytes of the current frame still to send (packetized flows).
    frame_left: u64,
    /// Gap after the current frame's last packet.
    frame_gap: u64,
    /// Sub-nanosecond remainder carried between gaps.
    carry: f64,
    clamps: u64,
}

impl ModelGen {
    pub(crate) fn new(spec: &FlowSpec, seed: u64) -> Self {
        let idt = match &spec.idt {
            IdtModel::Max => Idt::Max,
            IdtModel::Constant { pps } => Idt::Const(1e9 / pps),
            IdtModel::Random(d) => Idt::Random(d.sampler()),
        };
        let size = match &spec.size {
            SizeModel::Constant { bytes } => Size::Const(*bytes),
            SizeModel::Random(d) => Size::Random(d.sampler()),
        };
        let mut g = ModelGen {
            idt,
            size,
            burst: None,
            packetize: spec.packetize,
            transfer_left: spec.transfer_bytes,
            r_idt: rng(seed, 1),
            r_size: rng(seed, 2),
            r_burst: rng(seed, 3),
            frame_left: 0,
            frame_gap: 0,
            carry: 0.0,
            clamps: 0,
        };
        if let Some(b) = &spec.burst {
            let mut on = b.on_ms.sampler();
            let off = b.off_ms.sampler();
            let first = on.sample(&mut g.r_burst);
            let on_left = g.non_negative(first) * 1e6;
            g.burst = Some(BurstState { on, off, on_left });
        }
        g
    }

    fn non_negative(&mut self, v: f64) -> f64 {
        if v < 0.0 {
            self.clamps += 1;
            0.0
        } else {
            v
        }
    }

    /// Gap before the next packet in ns (fractional).
    fn draw_gap(&mut self) -> f64 {
        let mut g = match &mut self.idt {
            Idt::Max => 0.0,
            Idt::Const(ns) => *ns,
            Idt::Random(s) => {
                let ms = s.sample(&mut self.r_idt);
                self.non_negative(ms) * 1e6
            }
        };
        if let Some(mut b) = self.burst.take() {
            if g > b.on_left {
                // The next packet would fall past the end of the ON period:
                // the gap becomes the rest of it plus an OFF period, and the
                // next packet opens the next ON period.
                let off = b.off.sample(&mut self.r_burst);
                let on = b.on.sample(&mut self.r_burst);
                g = b.on_left + self.non_negative(off) * 1e6;
                b.on_left = self.non_negative(on) * 1e6;
            } else {
                b.on_left -= g;
            }
            self.burst = Some(b);
        }
        g.min(MAX_GAP_NS as f64)
    }

    fn draw_size(&mut self) -> u64 {
        match &mut self.size {
            Size::Const(b) => *b as u64,
            Size::Random(s) => {
                let v = s.sample(&mut self.r_size);
                let v = self.non_negative(v);
                // Truncate to whole bytes, as D-ITG does.
                let cap = if self.packetize.is_some() {
                    1e12
                } else {
                    MAX_PAYLOAD as f64
                };
                v.min(cap) as u64
            }
        }
    }

    fn gap_ns(&mut self, g: f64) -> u64 {
        let t = g + self.carry;
        let n = t.floor();
        self.carry = t - n;
        n as u64
    }

    /// Clamps to the payload range and the transfer budget. The budget is
    /// split so that no packet falls below the probe header and the sizes
    /// add up to `transfer_bytes` exactly.
    fn finish_size(&mut self, want: u64) -> u32 {
        // Random draws are capped at MAX_PAYLOAD already; a constant may
        // be a TCP record up to MAX_RECORD.
        let mut s = want.clamp(MIN_PAYLOAD as u64, MAX_RECORD as u64);
        if let Some(left) = self.transfer_left {
            if left == 0 {
                return MIN_PAYLOAD;
            }
            if left <= s {
                s = left.max(MIN_PAYLOAD as u64);
            } else if left - s < MIN_PAYLOAD as u64 {
                // Leave a full probe for the last packet.
                s = (left - MIN_PAYLOAD as u64).max(MIN_PAYLOAD as u64);
            }
            self.transfer_left = Some(left.saturating_sub(s));
        }
        s as u32
    }
}

impl Generator for ModelGen {
    fn next(&mut self) -> Departure {
        if let Some(p) = self.packetize {
            if self.frame_left == 0 {
                // A new frame: its size now, its gap (to the next frame)
                // after its last packet.
                self.frame_left = self.draw_size().max(MIN_PAYLOAD as u64);
                let g = self.draw_gap();
                self.frame_gap = self.gap_ns(g);
            }
            let chunk = self.frame_left.min(p as u64);
            self.frame_left -= chunk;
            let gap_ns = if self.frame_left == 0 {
                self.frame_gap
            } else {
                0
            };
            return Departure {
                gap_ns,
                size: self.finish_size(chunk),
            };
        }
        let g = self.draw_gap();
        let gap_ns = self.gap_ns(g);
        let s = self.draw_size();
        Departure {
            gap_ns,
            size: self.finish_size(s),
        }
    }

    fn clamps(&self) -> u64 {
        self.clamps
    }
}
