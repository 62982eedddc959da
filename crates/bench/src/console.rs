//! Where a run's printed table and its progress go. The benches write their lines here
//! instead of to standard output, so the caller decides: the `sluice` binary prints them and
//! draws a progress bar, tests collect them or drop them.

/// The receiving end of a run's output. `Sync`: simulations report progress from their
/// worker threads.
pub trait Console: Sync {
    /// One line of the results (the CLI prints it on standard output).
    fn line(&self, text: &str);
    /// One line about what is going on (the CLI prints it on standard error).
    fn note(&self, text: &str) {
        let _ = text;
    }
    /// Work of `total` units (runs, points, rate steps, iterations) begins.
    fn begin(&self, total: u64) {
        let _ = total;
    }
    /// One more unit is done.
    fn advance(&self) {}
    /// The work that [`Console::begin`] announced is over.
    fn finish(&self) {}
}

/// A console that drops everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl Console for Quiet {
    fn line(&self, _: &str) {}
}

/// `say!(console, "format", args...)`: one formatted line of results.
macro_rules! say {
    ($console:expr, $($arg:tt)*) => {
        $console.line(&format!($($arg)*))
    };
}

/// `note!(console, "format", args...)`: one formatted line about progress.
macro_rules! note {
    ($console:expr, $($arg:tt)*) => {
        $console.note(&format!($($arg)*))
    };
}

pub(crate) use {note, say};
