//! VoIP call quality: the ITU-T G.107 E-model (transmission rating R and
//! MOS) from one-way delay and packet loss, and a jitter-buffer model that
//! turns late packets into loss.
//!
//! Simplification (documented in docs/models.md): every G.107 parameter
//! keeps its default except the delays, which are all derived from the
//! measured mouth-to-ear delay Ta (T = Ta, Tr = 2·Ta). With defaults
//! Ro − Is − Id(0) = 93.2, so R = 93.2 − ΔId(Ta) − Ie,eff, where ΔId is the
//! growth of G.107's delay impairment over its zero-delay value (talker echo
//! Idte, listener echo Idle, pure delay Idd) and Ie,eff is the
//! equipment impairment with loss. Ie and Bpl per codec: ITU-T G.113
//! Appendix I.

use serde::{Deserialize, Serialize};

/// Codecs the E-model knows (G.113 Appendix I values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodecKind {
    /// G.711 with packet-loss concealment: Ie 0, Bpl 25.1.
    G711,
    /// G.723.1 6.3 kbit/s: Ie 15, Bpl 16.1.
    G723_1,
    /// G.729A: Ie 11, Bpl 19.0.
    G729A,
    /// Opus: no G.113 value exists; treated like G.711 with PLC (Ie 0,
    /// Bpl 25.1), an assumption stated in docs/models.md.
    Opus,
}

/// A codec as sent: its kind and the audio carried per packet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Codec {
    /// The codec.
    pub kind: CodecKind,
    /// Audio per packet in ms (the packetization delay).
    pub packet_ms: f64,
}

impl Codec {
    /// A codec of `kind` carrying `packet_ms` of audio per packet.
    pub fn new(kind: CodecKind, packet_ms: f64) -> Codec {
        Codec { kind, packet_ms }
    }

    /// Equipment impairment factor Ie (G.113 Appendix I, Table I.1).
    pub fn ie(&self) -> f64 {
        match self.kind {
            CodecKind::G711 | CodecKind::Opus => 0.0,
            CodecKind::G723_1 => 15.0,
            CodecKind::G729A => 11.0,
        }
    }

    /// Packet-loss robustness factor Bpl (G.113 Appendix I, Table I.3).
    pub fn bpl(&self) -> f64 {
        match self.kind {
            CodecKind::G711 | CodecKind::Opus => 25.1,
            CodecKind::G723_1 => 16.1,
            CodecKind::G729A => 19.0,
        }
    }

    /// Encoder look-ahead in ms (G.729: 5, G.723.1: 7.5, Opus: 6.5 at the
    /// default settings of RFC 6716, G.711: none).
    pub fn lookahead_ms(&self) -> f64 {
        match self.kind {
            CodecKind::G711 => 0.0,
            CodecKind::G729A => 5.0,
            CodecKind::G723_1 => 7.5,
            CodecKind::Opus => 6.5,
        }
    }

    /// Delay the sending side adds before the first bit leaves: one packet
    /// of audio plus the look-ahead.
    pub fn coding_delay_s(&self) -> f64 {
        (self.packet_ms + self.lookahead_ms()) / 1000.0
    }
}

/// E-model output.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    /// Transmission rating factor R (0–100), ITU-T G.107.
    pub r_factor: f64,
    /// Mean opinion score estimated from R (1–4.5).
    pub mos: f64,
}

/// R with G.107 defaults and no delay, no loss, G.711: Ro − Is − Id(0).
pub const R_DEFAULT: f64 = 93.2;

// G.107 default parameters used by the delay terms.
const RO: f64 = 94.77;
const NO: f64 = -61.18;
const RLR: f64 = 2.0;
const TELR: f64 = 65.0;
const WEPL: f64 = 110.0;

/// Talker-echo impairment Idte for echo-path delay `t_ms` (G.107 §7.3).
fn idte(t_ms: f64) -> f64 {
    let terv = TELR - 40.0 * ((1.0 + t_ms / 10.0) / (1.0 + t_ms / 150.0)).log10()
        + 6.0 * (-0.3 * t_ms * t_ms).exp();
    let roe = -1.5 * (NO - RLR - 2.0);
    let re = 80.0 + 2.5 * (terv - 14.0);
    let d = roe - re;
    (d / 2.0 + (d * d / 4.0 + 100.0).sqrt() - 1.0) * (1.0 - (-t_ms).exp())
}

/// Listener-echo impairment Idle for round-trip delay `tr_ms` (G.107 §7.3).
fn idle(tr_ms: f64) -> f64 {
    let rle = 10.5 * (WEPL + 7.0) * (tr_ms + 1.0).powf(-0.25);
    let d = RO - rle;
    d / 2.0 + (d * d / 4.0 + 169.0).sqrt()
}

/// Pure-delay impairment Idd for absolute delay `ta_ms` (G.107 §7.3).
fn idd(ta_ms: f64) -> f64 {
    if ta_ms <= 100.0 {
        return 0.0;
    }
    let x = (ta_ms / 100.0).log2();
    25.0 * ((1.0 + x.powi(6)).powf(1.0 / 6.0) - 3.0 * (1.0 + (x / 3.0).powi(6)).powf(1.0 / 6.0)
        + 2.0)
}

/// Growth of G.107's delay impairment Id over its zero-delay value for a
/// mouth-to-ear delay of `ta_ms` (T = Ta, Tr = 2·Ta).
pub fn delay_impairment(ta_ms: f64) -> f64 {
    let ta = ta_ms.max(0.0);
    // At a few ms G.107's talker-echo term dips slightly below its T = 0
    // value (Idte < 0); a delay must never make R better than no delay.
    (idte(ta) + (idle(2.0 * ta) - idle(0.0)) + idd(ta)).max(0.0)
}

/// Effective equipment impairment Ie,eff = Ie + (95 − Ie)·Ppl/(Ppl/BurstR + Bpl),
/// Ppl in percent.
pub fn ie_eff(codec: &Codec, loss_ratio: f64, burst_r: f64) -> f64 {
    let ppl = (loss_ratio.clamp(0.0, 1.0)) * 100.0;
    let br = if burst_r.is_finite() && burst_r > 0.0 {
        burst_r
    } else {
        1.0
    };
    let ie = codec.ie();
    ie + (95.0 - ie) * ppl / (ppl / br + codec.bpl())
}

/// MOS (conversational quality estimate) from R, G.107 Annex B.
pub fn mos_from_r(r: f64) -> f64 {
    if r <= 0.0 {
        1.0
    } else if r >= 100.0 {
        4.5
    } else {
        1.0 + 0.035 * r + r * (r - 60.0) * (100.0 - r) * 7e-6
    }
}

/// The E-model for random loss (BurstR = 1): `one_way_delay_s` is the
/// mouth-to-ear delay, `loss_ratio` in [0, 1].
pub fn emodel(codec: &Codec, one_way_delay_s: f64, loss_ratio: f64) -> Quality {
    emodel_burst(codec, one_way_delay_s, loss_ratio, 1.0)
}

/// The E-model with G.107's burst ratio `burst_r` (1 = random loss).
pub fn emodel_burst(codec: &Codec, one_way_delay_s: f64, loss_ratio: f64, burst_r: f64) -> Quality {
    let r =
        R_DEFAULT - delay_impairment(one_way_delay_s * 1000.0) - ie_eff(codec, loss_ratio, burst_r);
    Quality {
        r_factor: r,
        mos: mos_from_r(r),
    }
}

/// A fixed playout buffer: each packet is played `depth_s` after the base
/// (minimum) network delay; a packet arriving later than that is as good as
/// lost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JitterBuffer {
    /// Playout delay, seconds.
    pub depth_s: f64,
}

impl Default for JitterBuffer {
    /// 60 ms: a common fixed playout delay for 20 ms packets.
    fn default() -> Self {
        JitterBuffer { depth_s: 0.060 }
    }
}

impl JitterBuffer {
    /// A buffer of `depth_s` seconds.
    pub fn new(depth_s: f64) -> Self {
        JitterBuffer {
            depth_s: depth_s.max(0.0),
        }
    }

    /// Delay above which a packet misses its playout time.
    pub fn late_threshold_s(&self, base_delay_s: f64) -> f64 {
        base_delay_s + self.depth_s
    }

    /// Share of `delays_s` (received packets) later than min + depth.
    pub fn late_fraction(&self, delays_s: &[f64]) -> f64 {
        if delays_s.is_empty() {
            return 0.0;
        }
        let base = delays_s.iter().copied().fold(f64::INFINITY, f64::min);
        let thr = self.late_threshold_s(base);
        delays_s.iter().filter(|&&d| d > thr).count() as f64 / delays_s.len() as f64
    }

    /// Share of packets later than the buffer, from a delay distribution
    /// given as its survival function (`share_above(d)` = share of received
    /// packets with delay > d, e.g. read off a histogram).
    pub fn late_fraction_with(&self, base_delay_s: f64, share_above: impl Fn(f64) -> f64) -> f64 {
        share_above(self.late_threshold_s(base_delay_s)).clamp(0.0, 1.0)
    }

    /// Quality from summary numbers: `base_delay_s` the network one-way
    /// delay the buffer is anchored to (the minimum delay if known, else the
    /// mean), `loss_ratio` the network loss, `late_fraction` the share of
    /// received packets later than the buffer. Mouth-to-ear delay =
    /// coding delay + base delay + buffer depth; loss = network loss + late.
    pub fn quality(
        &self,
        codec: &Codec,
        base_delay_s: f64,
        loss_ratio: f64,
        late_fraction: f64,
    ) -> Quality {
        let loss = loss_ratio.clamp(0.0, 1.0);
        let eff = loss + (1.0 - loss) * late_fraction.clamp(0.0, 1.0);
        let m2e = codec.coding_delay_s() + base_delay_s.max(0.0) + self.depth_s;
        emodel(codec, m2e, eff)
    }

    /// Quality from per-packet delays of the received packets and the
    /// number lost in the network.
    pub fn assess(&self, codec: &Codec, delays_s: &[f64], lost: u64) -> Quality {
        let total = delays_s.len() as f64 + lost as f64;
        let loss = if total > 0.0 {
            lost as f64 / total
        } else {
            1.0
        };
        let base = delays_s.iter().copied().fold(f64::INFINITY, f64::min);
        let base = if base.is_finite() { base } else { 0.0 };
        self.quality(codec, base, loss, self.late_fraction(delays_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g711() -> Codec {
        Codec::new(CodecKind::G711, 20.0)
    }

    #[test]
    fn g711_clean_line_is_93_2() {
        // No delay, no loss: R = 93.2 (G.107 defaults), MOS =
        // 1 + 0.035·93.2 + 93.2·33.2·6.8·7e-6 = 1 + 3.262 + 0.1473 = 4.409.
        let q = emodel(&g711(), 0.0, 0.0);
        assert!((q.r_factor - 93.2).abs() < 1e-9, "{q:?}");
        assert!((q.mos - 4.409).abs() < 0.001, "{q:?}");
        // 1 ms: the echo terms barely move R.
        let q = emodel(&g711(), 0.001, 0.0);
        assert!(q.r_factor > 92.7 && q.r_factor <= 93.2, "{q:?}");
    }

    #[test]
    fn hand_computed_200ms() {
        // Ta = 200 ms, G.107 defaults:
        // Idd: X = log2(2) = 1 → 25·(2^(1/6) − 3·(1+3^-6)^(1/6) + 2)
        //      = 25·(1.122462 − 3.000686 + 2) = 3.044
        // Idte: TERV = 65 − 40·log10(21/2.3333) = 65 − 38.170 = 26.830,
        //      Re = 80 + 2.5·12.830 = 112.08, Roe = 97.77, d = −14.31,
        //      Idte = −7.155 + sqrt(51.19 + 100) − 1 = 4.141
        // Idle(400) − Idle(0): Rle = 1228.5/401^0.25 = 274.53 → 0.936;
        //      Rle(0) = 1228.5 → 0.149; difference 0.787
        // R = 93.2 − 3.044 − 4.141 − 0.787 = 85.23
        let q = emodel(&g711(), 0.200, 0.0);
        assert!((q.r_factor - 85.23).abs() < 0.05, "{q:?}");
    }

    #[test]
    fn hand_computed_loss() {
        // 1 % random loss, G.711+PLC: Ie,eff = 95·1/(1 + 25.1) = 3.640 → R = 89.56
        let q = emodel(&g711(), 0.0, 0.01);
        assert!((q.r_factor - 89.56).abs() < 0.01, "{q:?}");
        // G.729A, 2 %: Ie,eff = 11 + 84·2/(2 + 19) = 11 + 8.0 = 19.0 → R = 74.2
        let q = emodel(&Codec::new(CodecKind::G729A, 20.0), 0.0, 0.02);
        assert!((q.r_factor - 74.2).abs() < 0.01, "{q:?}");
        // Burstier loss hurts more.
        let b = emodel_burst(&g711(), 0.0, 0.05, 2.0);
        let r = emodel(&g711(), 0.0, 0.05);
        assert!(b.r_factor < r.r_factor);
    }

    #[test]
    fn r_falls_past_150ms_and_with_loss() {
        let r = |d: f64| emodel(&g711(), d, 0.0).r_factor;
        assert!(r(0.150) - r(0.300) > 8.0, "{} {}", r(0.150), r(0.300));
        assert!(r(0.300) > r(0.400));
        assert!(r(0.400) - r(0.500) > 5.0);
        let mut prev = 100.0;
        for l in [0.0, 0.01, 0.02, 0.05, 0.1, 0.2] {
            let q = emodel(&g711(), 0.05, l);
            assert!(q.r_factor < prev);
            prev = q.r_factor;
        }
        assert!(emodel(&g711(), 0.05, 0.2).mos < 3.0);
    }

    #[test]
    fn jitter_buffer_counts_late_as_lost() {
        let jb = JitterBuffer::new(0.050);
        // base 10 ms; threshold 60 ms; two of ten late.
        let mut d = vec![0.010; 8];
        d.push(0.061);
        d.push(0.200);
        assert!((jb.late_fraction(&d) - 0.2).abs() < 1e-12);
        let with_late = jb.assess(&g711(), &d, 0);
        let on_time = jb.assess(&g711(), &[0.010; 10], 0);
        assert!(
            with_late.r_factor < on_time.r_factor - 20.0,
            "{with_late:?} {on_time:?}"
        );
        // From a distribution: exponential jitter of mean 20 ms over a 10 ms
        // base; P(D > 60 ms) = exp(−50/20) = 0.0821.
        let f = jb.late_fraction_with(0.010, |d| (-(d - 0.010) / 0.020f64).exp().min(1.0));
        assert!((f - (-2.5f64).exp()).abs() < 1e-12);
        // Summary form agrees with the per-packet form.
        let s = jb.quality(&g711(), 0.010, 0.0, 0.2);
        assert!((s.r_factor - with_late.r_factor).abs() < 1e-9);
    }
}
