//! Traffic-model options of `wirebench send` (D-ITG's letters), turned into a
//! `model::FlowSpec`. Kept apart from the rest of `send` so that the model
//! options grow here without touching the engine's options.

use wirebench_model::FlowSpec;

#[derive(clap::Args, Debug, Clone)]
pub struct FlowArgs {
    /// Constant rate: PPS packets per second (D-ITG -C). Default 1000.
    #[arg(short = 'C', value_name = "PPS", allow_negative_numbers = true, group = "idt")]
    pub constant_rate: Option<f64>,
    /// Send as fast as the path allows (no pacing).
    #[arg(long = "max", group = "idt")]
    pub max: bool,
    /// Constant payload size in bytes, probe header included (D-ITG -c). Default 512.
    #[arg(short = 'c', value_name = "BYTES", allow_negative_numbers = true)]
    pub constant_size: Option<i64>,
}

impl FlowArgs {
    pub fn to_spec(&self) -> anyhow::Result<FlowSpec> {
        let size = self.constant_size.unwrap_or(512);
        let size = u32::try_from(size).map_err(|_| {
            crate::exit::bad_input(format!("-c: payload must be a positive byte count, got {size}"))
        })?;
        let spec = if self.max {
            FlowSpec::max_rate(size)
        } else {
            FlowSpec::constant(self.constant_rate.unwrap_or(1000.0), size)
        };
        spec.map_err(crate::exit::bad_input)
    }
}
