//! `wirebench send` (not built yet).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`wirebench send` is not built yet")
}
