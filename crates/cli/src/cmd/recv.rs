//! `wirebench recv` (not built yet).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`wirebench recv` is not built yet")
}
