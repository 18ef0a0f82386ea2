//! `wirebench run` (not built yet).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`wirebench run` is not built yet")
}
