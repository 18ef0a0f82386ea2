//! `wirebench report` (not built yet).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`wirebench report` is not built yet")
}
