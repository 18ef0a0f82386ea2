//! `wirebench demo` (not built yet).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`wirebench demo` is not built yet")
}
