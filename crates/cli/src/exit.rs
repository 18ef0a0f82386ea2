//! Exit codes and error printing.
//!
//! Subcommands return `anyhow::Result<()>`. An error whose chain holds a
//! [`BadInput`] means the user asked for something impossible (exit 2);
//! [`LabBusy`], that another campaign holds the lab's nodes (exit 75,
//! sysexits' EX_TEMPFAIL: the same command may work later); anything else
//! means the measurement itself failed (exit 1).

use std::fmt;

/// Marks an error as the user's input being wrong (exit status 2).
#[derive(Debug)]
pub struct BadInput(pub String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Another controller's campaign holds a node (exit status 75).
#[derive(Debug)]
pub struct LabBusy(pub String);

impl fmt::Display for LabBusy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LabBusy {}

/// `bail_input!("...")` returns a [`BadInput`] error from the current function.
#[macro_export]
macro_rules! bail_input {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::exit::BadInput(format!($($arg)*))))
    };
}

/// Wraps any error as bad input, keeping its message.
pub fn bad_input<E: fmt::Display>(e: E) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.to_string()))
}

/// The error and its causes on one line, each cause once: library errors
/// often show their source in their own text as well (`cannot write F: No
/// space left on device`), and `{:#}` then printed the OS error twice.
pub fn message(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let t = cause.to_string();
        if !line.contains(&t) {
            line.push_str(": ");
            line.push_str(&t);
        }
    }
    line
}

pub fn code_for(result: anyhow::Result<()>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wirebench: {}", message(&e));
            if e.chain().any(|c| c.downcast_ref::<BadInput>().is_some()) {
                2
            } else if e.chain().any(|c| c.downcast_ref::<LabBusy>().is_some()) {
                75
            } else {
                1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrap(std::io::Error);

    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "cannot connect to 127.0.0.1:9: {}", self.0)
        }
    }

    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_text_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = anyhow::Error::new(Wrap(io));
        assert_eq!(
            format!("{e:#}"),
            "cannot connect to 127.0.0.1:9: refused: refused"
        );
        assert_eq!(message(&e), "cannot connect to 127.0.0.1:9: refused");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(message(&e), "outer: inner");
    }
}
