//! The pre-shared key of `send` and `recv` (docs/security.md): from
//! `--key-file FILE` or the `WIREBENCH_KEY` environment variable, never
//! from the command line itself, where every user of the host can read it
//! in the process list.

use crate::exit::bad_input;
use std::path::Path;
use wirebench_wire::auth::{Key, KEY_ENV};

/// The key to use, if any: the file wins over the environment. A file
/// that others may read is refused, as ssh refuses such private keys.
pub fn load(file: Option<&Path>) -> anyhow::Result<Option<Key>> {
    if let Some(path) = file {
        check_private(path)?;
        let text =
            wirebench_input::read_text(path).map_err(|e| bad_input(format!("--key-file: {e}")))?;
        let key = Key::from_text(text.as_bytes())
            .map_err(|e| bad_input(format!("--key-file {}: {e}", path.display())))?;
        return Ok(Some(key));
    }
    match std::env::var_os(KEY_ENV) {
        None => Ok(None),
        Some(v) => {
            let key = Key::from_text(v.as_encoded_bytes())
                .map_err(|e| bad_input(format!("{KEY_ENV}: {e}")))?;
            Ok(Some(key))
        }
    }
}

#[cfg(unix)]
fn check_private(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| bad_input(format!("--key-file {}: {e}", path.display())))?;
    // A device or FIFO is refused by the reader as not a regular file,
    // which says more than its mode (/dev/zero is 666).
    let mode = meta.permissions().mode();
    if meta.is_file() && mode & 0o077 != 0 {
        return Err(bad_input(format!(
            "--key-file {}: readable by others (mode {:03o}); chmod 600 it",
            path.display(),
            mode & 0o777
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}
